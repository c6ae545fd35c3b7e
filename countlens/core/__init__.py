"""The core floor, below every room: errors, atomic I/O and provenance, the result contract, the activation
store with its one dtype-preserving reader, the one resumable cache, location names, threads and the
process pool, and the report page's building blocks. It imports no room."""
