"""arena: a common evaluation arena for optimizers of block-diffusion language models."""
__version__ = "0.1.0"
