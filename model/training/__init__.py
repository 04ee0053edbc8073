"""Training of the embedded checkpoint: synthetic data (:mod:`.data`), the diffusion objective and loop
(:mod:`.train`), BFCL AST scoring (:mod:`.bfcl`). ``python -m model.training --help`` lists the options."""
