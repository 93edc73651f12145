"""Code shared by the examples, benchmarks and tools: argument types and the digits task."""
