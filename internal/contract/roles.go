package contract

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
)

// AnnotationRoles on the primary Lease is the MyDatabase's declared roles
// (Roles, JSON), which the primary's instance manager applies: there, as
// for the quorum, a change reaches it without a pod restart. It holds no
// password, only the names of the Secrets that hold them.
const AnnotationRoles = "database.example.com/roles"

// Role is a declared role as the instance manager applies it
// (spec.roles[] with its defaults resolved).
type Role struct {
	Name   string `json:"name"`
	Absent bool   `json:"absent,omitempty"`

	Login           bool       `json:"login,omitempty"`
	CreateDB        bool       `json:"createdb,omitempty"`
	CreateRole      bool       `json:"createrole,omitempty"`
	Inherit         bool       `json:"inherit,omitempty"`
	ConnectionLimit int32      `json:"connectionLimit"`
	ValidUntil      *time.Time `json:"validUntil,omitempty"`
	InRoles         []string   `json:"inRoles,omitempty"`
	Comment         string     `json:"comment,omitempty"`
	// PasswordSecret names the Secret whose "password" key is the role's
	// password; "" for none.
	PasswordSecret string `json:"passwordSecret,omitempty"`
}

// Roles is the value of AnnotationRoles.
type Roles []Role

func (r Roles) String() string {
	b, _ := json.Marshal(r) // Roles always marshal
	return string(b)
}

// RolesDigest names a declaration (the annotation's value) in a report:
// what the outcome there is of.
func RolesDigest(annotation string) string {
	sum := sha256.Sum256([]byte(annotation))
	return hex.EncodeToString(sum[:8])
}

// ParseRoles reads AnnotationRoles; an empty value is no roles.
func ParseRoles(s string) (Roles, error) {
	if s == "" {
		return nil, nil
	}
	var r Roles
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return nil, fmt.Errorf("the Lease's %s annotation: %w", AnnotationRoles, err)
	}
	return r, nil
}
