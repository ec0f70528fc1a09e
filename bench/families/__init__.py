"""Helpers of bench/core_families.py: the networks of each family, and their PyTorch twins."""
