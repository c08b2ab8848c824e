"""What keeps the service working under hostile or careless clients, beside the doors that use
it: rate limits (`rates`), the client's address behind trusted proxies (`clients`), and the
refusal log's recorder (`refusals`), which writes off the request path, to its table
(`refusal_store`)."""
