//! Suspend-and-prove: pause a chain of Flux objects and prove that Flux has let go.
