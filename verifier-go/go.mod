module recon/verifier-go

go 1.22
