"""The EGG workflow: stage order, which tools each stage allows, selective handoff."""
