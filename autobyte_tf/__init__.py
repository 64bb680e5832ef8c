"""AutoByte for TensorFlow/Keras: AutoByteStrategy (all-reduce)."""
