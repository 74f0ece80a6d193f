"""SCPO on PyTorch Lightning: the credit math (pure), the PyTorch Lightning application, rollout and scorers."""
