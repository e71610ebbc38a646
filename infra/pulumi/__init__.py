"""The Pulumi program and its resources; imports infra.stack and infra.providers only."""
