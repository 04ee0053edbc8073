"""Fused kernels for the denoising step (Triton on CUDA) with PyTorch reference paths used on CPU.

Imports no other package of the project.
"""
