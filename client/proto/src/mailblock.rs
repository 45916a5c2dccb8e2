//! The RDV/1 mail block (§5.2.1, §5.2.2).
