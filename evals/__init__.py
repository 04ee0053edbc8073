"""Evaluations kept apart from the library: BFCL (the dev set), the binder calibration."""
