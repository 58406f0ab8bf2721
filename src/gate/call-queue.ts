/**
 * The queue of one partition: FIFO within a priority, higher priorities first. Entries removed
 * from the middle (aborts, deadline refusals) are marked and skipped, so removal is O(1).
 */
export interface QueueEntry {
  readonly priority: number;
  removed: boolean;
}

interface Lane<E> {
  readonly priority: number;
  items: E[];
  head: number;
}

export class CallQueue<E extends QueueEntry> {
  /** Lanes in descending priority; almost always exactly one. */
  private lanes: Lane<E>[] = [];
  /** Live (not removed) entries. */
  size = 0;

  /** Append `entry` behind its priority; returns true when nothing of lower priority is queued (a pure append). */
  push(entry: E): boolean {
    const index = this.laneIndex(entry.priority);
    this.lanes[index]!.items.push(entry);
    this.size++;
    for (let j = index + 1; j < this.lanes.length; j++) {
      const later = this.lanes[j]!;
      if (later.head < later.items.length) return false;
    }
    return true;
  }

  /** Index of the lane for `priority`, created in order if missing. */
  private laneIndex(priority: number): number {
    const lanes = this.lanes;
    let i = 0;
    while (i < lanes.length && lanes[i]!.priority > priority) i++;
    if (lanes[i]?.priority !== priority) lanes.splice(i, 0, { priority, items: [], head: 0 });
    return i;
  }

  /**
   * The lowest priority that may still hold entries (a lane of removed entries counts until
   * passed: conservative, so a caller may re-plan when it need not, never the reverse).
   */
  lowestPriority(): number {
    const lanes = this.lanes;
    for (let i = lanes.length - 1; i >= 0; i--) {
      const lane = lanes[i]!;
      if (lane.head < lane.items.length) return lane.priority;
    }
    return Infinity;
  }

  /** Put `entry` back at the front of its priority lane (a retried call keeps its turn). */
  unshift(entry: E): void {
    const lane = this.lanes[this.laneIndex(entry.priority)]!;
    if (lane.head > 0) lane.items[--lane.head] = entry;
    else lane.items.unshift(entry);
    entry.removed = false;
    this.size++;
  }

  /** The first live entry, without removing it. */
  peek(): E | undefined {
    const lanes = this.lanes;
    while (lanes.length > 0) {
      const lane = lanes[0]!;
      while (lane.head < lane.items.length) {
        const entry = lane.items[lane.head]!;
        if (!entry.removed) return entry;
        lane.items[lane.head++] = undefined as unknown as E;
      }
      lanes.shift();
    }
    return undefined;
  }

  /** Remove and return the first live entry. */
  shift(): E | undefined {
    const entry = this.peek();
    if (entry === undefined) return undefined;
    const lane = this.lanes[0]!;
    lane.items[lane.head++] = undefined as unknown as E;
    // Reclaim the consumed prefix once it dominates, keeping shift amortized O(1).
    if (lane.head >= 1024 && lane.head * 2 >= lane.items.length) {
      lane.items = lane.items.slice(lane.head);
      lane.head = 0;
    }
    entry.removed = true;
    this.size--;
    return entry;
  }

  /** Mark `entry` removed (it is skipped later). Returns false if it already was. */
  remove(entry: E): boolean {
    if (entry.removed) return false;
    entry.removed = true;
    this.size--;
    return true;
  }

  /** Live entries in start order. */
  *entries(): IterableIterator<E> {
    for (const lane of this.lanes) {
      for (let i = lane.head; i < lane.items.length; i++) {
        const entry = lane.items[i]!;
        if (!entry.removed) yield entry;
      }
    }
  }
}
