"""Evaluations kept apart from the library: BFCL (the dev set), the held-out synthetic split and the settings grid
on it, the binder calibration."""
