"""GPU kernels opsctl ships into the sglang image (imported lazily: `import opsctl` needs no
torch)."""
