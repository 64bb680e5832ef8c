"""AutoByte: the framework-free core shared by autobyte_tf and autobyte_mx."""
