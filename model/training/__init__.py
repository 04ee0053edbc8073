"""Training of the embedded checkpoint: synthetic data (:mod:`.data`), the diffusion objective and loop
(:mod:`.train`). ``python -m model.training --help`` lists the options."""
