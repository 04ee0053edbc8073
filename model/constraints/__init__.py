"""Tool-call constraints: tool declarations and their JSON Schemas (:mod:`.schema`), llguidance grammars of
tool calls in the Gemma and JSON syntaxes (:mod:`.grammar`), parsing and formatting of calls (:mod:`.parse`),
cached llguidance tokenizers (:mod:`.llg`) and the constraint applied during denoising (:mod:`.denoise`).

Submodules are imported explicitly (``from model.constraints.grammar import tool_call_grammar``) so that
importing the package stays cheap.
"""
