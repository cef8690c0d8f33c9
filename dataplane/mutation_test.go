package dataplane

// SetMutations removes durability or safety steps from s, for the tests
// that prove the other tests would notice.
func SetMutations(s *Service, m Mutations) {
	s.mut = m
}
