"""The trace room: capture a torch-profiler trace of a running server and name its bottleneck.

The logic modules (chrome, analyze, signatures, report) use the standard library only, so the
GPU bench script can shrink and check its traces on the accelerator machine without opsctl's
dependencies.
"""
