package journal

import "github.com/stepgate/stepgate/journal/storable"

// unstorable is [storable.Translate]: err as an [storable.ErrUnstorable] if Postgres
// refused a value it cannot store, unchanged otherwise.
func unstorable(err error) error { return storable.Translate(err) }
