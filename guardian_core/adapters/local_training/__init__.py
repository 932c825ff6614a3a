"""The local guardian's bundled training set: one JSON Lines file of labelled traces per
condition, and `generate.py`, the seeded script that writes them."""
