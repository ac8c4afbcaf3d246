"""Hypothesis strategies and fuzz harnesses for RoCE (public API)."""
