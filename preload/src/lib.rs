//! libgoset.so (under construction).
