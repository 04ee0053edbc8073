"""The constraint applied during denoising (:mod:`.denoise`: an llguidance matcher over the canvas) and
whole-span copies in answers (:mod:`.span_copy`). The grammars it applies come from the torch-free
:mod:`grammar` package, the tool schemas they are built from from :mod:`schema`.
"""
