"""The Gemma 4 tool-call protocol as text and grammars, without torch: control tokens, llguidance grammars of one
assistant turn compiled from the schema IR, grounded values, shortest completion, and the parsing and formatting
of calls. Imports only :mod:`schema` among the project's packages; import submodules explicitly (cheap import).
"""
