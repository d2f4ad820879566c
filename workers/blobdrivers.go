package workers

// Checkpoint storage drivers for gocloud.dev/blob URLs. engine/checkpoint
// opens file://, mem:// and s3:// (MinIO too); workers add the other cloud
// ones so a node worker accepts gs:// and azblob:// checkpoint URLs.
import (
	_ "gocloud.dev/blob/azureblob"
	_ "gocloud.dev/blob/gcsblob"
)
