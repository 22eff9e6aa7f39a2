package migrations

// History returns the names and checksums of the migrations the baseline replaces.
func History() (names, checksums []string) {
	for _, h := range history {
		names = append(names, h.name)
		checksums = append(checksums, h.checksum)
	}
	return names, checksums
}
