//! Owner fences: the coordination Lease and owner annotations with compare-and-swap.
