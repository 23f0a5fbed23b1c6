"""rmsnorm_kernel: placeholder while the kernel layer is written."""
