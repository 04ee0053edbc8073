"""Hardened Docker execution of model-written code. Imports no other package of the project."""
