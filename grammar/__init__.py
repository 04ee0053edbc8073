"""The Gemma 4 tool-call protocol as text and grammars, without torch: control-token names
(:mod:`.special_tokens`), llguidance grammars of one assistant turn in the Gemma and JSON call syntaxes
(:mod:`.turn`, compiled from the schema IR by :mod:`.gemma_lark`), grounded values (:mod:`.grounding`), the
shortest completion of a matcher (:mod:`.completion`), cached llguidance tokenizers (:mod:`.llg`), and the
parsing and formatting of calls and values (:mod:`.parse`, the one ``format_value``).

Imports only :mod:`schema` among the project's packages; ``model`` and ``agentkit`` import it. Submodules are
imported explicitly (``from grammar.turn import tool_call_grammar``) so that importing the package stays cheap.
"""
