"""opsctl's stand-in for IPython on the accelerator machine (not IPython).

sglang/utils.py imports `HTML` and `display` from IPython.display at module level for its
notebook helpers; the server never calls them. IPython and its dependency tree are not on the
device image, so the bundle ships this shim instead of ~6 MB of notebook packages.
"""
