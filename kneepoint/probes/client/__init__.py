"""The client side of a load point: the OpenAI-compatible load generator (its own HTTP/1.1
client, one request's stream read token by token), the warm-up burst, capped page reads and
the greedy-output quality check."""
