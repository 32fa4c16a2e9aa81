"""Adapters from rollpoint rollouts to trainers' own interfaces."""
