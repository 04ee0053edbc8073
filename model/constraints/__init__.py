"""The constraint applied during denoising (:mod:`.denoise`) and whole-span copies in answers (:mod:`.span_copy`)."""
