"""Third-party code kept verbatim as test oracles (each file names its source, commit and license)."""
