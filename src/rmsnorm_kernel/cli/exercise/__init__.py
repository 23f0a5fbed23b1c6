"""The exercise: deliberately broken seed-style kernels (mutants) and the run that kills them."""
