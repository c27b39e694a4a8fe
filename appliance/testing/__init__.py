"""Testing pipelines in pytest: the `floe` fixture and friends (`plugin`), and the client they hand out."""
