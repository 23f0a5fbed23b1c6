"""The exercise: deliberately broken tutorial-style kernels (mutants), and the run that kills
them."""
