"""Value-guided search at test time: OREO's value model V chooses between sampled continuations."""
