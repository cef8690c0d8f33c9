package dataplane

// SetMutations removes durability or safety steps from s, for the tests
// that prove the other tests would notice: skipPersist makes persist do
// nothing, skipZero leaves fresh blocks as they were.
func SetMutations(s *Service, skipPersist, skipZero bool) {
	s.skipPersist, s.skipZero = skipPersist, skipZero
}
