"""NCCL code backend: generated CUDA/NCCL programs for any schedule, and an MSCCL scheduler plugin."""
