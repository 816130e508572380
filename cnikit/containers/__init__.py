"""The daemon in containers: podman with the kit's configuration, the local image build,
the node runtimes (`process`, `podman`, `docker`) and podman as a real CNI client."""
