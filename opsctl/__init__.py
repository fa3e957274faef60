"""opsctl: deploy GLM-5-NVFP4 with sglang on one 8x RTX PRO 6000 Blackwell host."""

__version__ = "0.1.0"
