package outbox

// ClaimFloor exposes the relay's claim floor to the tests of package
// outbox_test.
func ClaimFloor(r *Relay) int64 { return r.eng.Floor() }
