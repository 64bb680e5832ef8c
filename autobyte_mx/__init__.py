"""AutoByte for MXNet: the kvstore registered as 'autobyte' (parameter server)."""
