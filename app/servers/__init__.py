"""Many servers behind one gateway."""
