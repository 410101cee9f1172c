"""scalerl: predictable reinforcement learning for language models.

Implements *The Art of Scaling Reinforcement Learning Compute for LLMs* (ScaleRL, arXiv 2510.13786):
the sigmoid compute-reward curve and its fitting (``scalerl.curves``), the ScaleRL recipe and every
alternative the paper ablates (``scalerl.algo``), and a trainer that runs it from a laptop CPU upwards.
"""

__version__ = "0.1.0"
