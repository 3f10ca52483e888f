"""Experiment-only variants of the methods (studies name them by import path); never imported by arena or methods."""
