package storeurl

// Check reports whether rawURL is a store URL Open would accept, without
// connecting: the scheme, hosts, path and query parameters. Its errors wrap
// ErrBadURL and show the URL only in its redact.URL form.
func Check(rawURL string) error {
	_, _, err := parse(rawURL)
	return err
}
