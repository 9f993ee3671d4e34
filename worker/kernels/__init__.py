"""Native CPU kernels (C++ in csrc/, built per machine) and the weight layouts they read."""
