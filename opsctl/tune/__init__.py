"""The tune room: a measured search over a variant's server settings (`opsctl tune`)."""
