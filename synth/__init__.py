"""Schedule IR, algorithms, solver, verifier and simulator."""
