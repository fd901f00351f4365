"""The processes of recon."""
