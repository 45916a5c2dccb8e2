-- Addresses are now keyed by the never-rotated address key (issue #4;
-- SPEC §5.2.2 "permanent opt-out honored"), no longer by a key derived from
-- the rotating master secret. optouts.addr_hash now holds H, the opt-out id
-- of the token (hex of HMAC(k_optout, canon(address))[..16]), and
-- sends.addr_hash the HMAC under the address key's hash key. Rows written
-- under the old keys would never match again: there are no deployments
-- yet, so they are cleared rather than converted (which would need every
-- address in the clear).
DELETE FROM optouts;
DELETE FROM sends;
