package ident

import (
	"strconv"
	"strings"
)

// PartitionWidth is how many seq values one partition of a partitioned
// outbox table covers: partition k holds seq in [k*PartitionWidth,
// (k+1)*PartitionWidth). A relay rotates partitions long before one fills,
// by moving the sequence to the next partition's start, so the width only
// has to exceed what a partition ever takes.
const PartitionWidth int64 = 1 << 32

// partitionDigits is the longest partition number's length: seq is a
// bigint, so k < 2^31.
const partitionDigits = 10

// SeqSequence is the qualified, quoted name of the sequence a partitioned
// table's seq column takes its values from (an identity column's would have
// the same name; PostgreSQL 15 has no identity on partitioned tables).
func (n Names) SeqSequence() (string, error) { return n.qualified("seq sequence", n.Table+"_seq_seq") }

// SeqDefault is the seq column's default on a partitioned table.
func (n Names) SeqDefault() (string, error) {
	q, err := n.SeqSequence()
	if err != nil {
		return "", err
	}
	return "nextval('" + strings.ReplaceAll(q, "'", "''") + "'::regclass)", nil
}

// PartitionPrefix is the unquoted prefix of a partition's name; the
// number k follows it.
func (n Names) PartitionPrefix() string { return n.Table + "_p" }

// Partition is the quoted, qualified name of partition k.
func (n Names) Partition(k int64) (string, error) {
	return n.qualified("partition", n.PartitionPrefix()+strconv.FormatInt(k, 10))
}

// CheckPartitionable reports whether every partition name fits.
func (n Names) CheckPartitionable() error {
	if _, err := n.qualified("partition", n.PartitionPrefix()+strings.Repeat("9", partitionDigits)); err != nil {
		return err
	}
	_, err := n.SeqSequence()
	return err
}

// FirstPartitionUpper is the upper bound of partition 0, as SQL.
func (n Names) FirstPartitionUpper() string { return strconv.FormatInt(PartitionWidth, 10) }
